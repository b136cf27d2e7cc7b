//! remote_read's STREAMED_XOR_CHUNKS answer, pure encoding: samples cut
//! into Prometheus XOR chunks (the Gorilla encoding of `tsdb/chunkenc`,
//! byte for byte, at most 120 samples a chunk as Prometheus's TSDB cuts
//! them), one series per `ChunkedReadResponse` frame (a series longer
//! than a frame's byte budget spans several), each frame written as
//! Prometheus's `ChunkedWriter` does: uvarint length, CRC32-Castagnoli
//! (big-endian) of the message, the message.

use shardhouse_common::prom_proto::Label;
use shardhouse_promql::Series;

/// The answer's content type (Prometheus's `read_handler.go`).
pub const CONTENT_TYPE: &str =
    "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";
/// Samples per chunk: what Prometheus's TSDB head cuts at.
pub const SAMPLES_PER_CHUNK: usize = 120;
/// A frame's byte budget (Prometheus's `--storage.remote.read-max-bytes-in-frame`).
pub const MAX_BYTES_IN_FRAME: usize = 1024 * 1024;
/// `prometheus.Chunk.Encoding.XOR`.
const ENCODING_XOR: i32 = 1;

/// `prometheus.ChunkedReadResponse` (remote.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkedReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub chunked_series: Vec<ChunkedSeries>,
    /// Which query of the request the series answers.
    #[prost(int64, tag = "2")]
    pub query_index: i64,
}

/// `prometheus.ChunkedSeries` (remote.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChunkedSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub chunks: Vec<Chunk>,
}

/// `prometheus.Chunk` (types.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    #[prost(int64, tag = "1")]
    pub min_time_ms: i64,
    #[prost(int64, tag = "2")]
    pub max_time_ms: i64,
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

/// Prometheus's `bstream`: bits written most significant first; `free`
/// is how many bits of the last byte are still unwritten. Kept exactly as
/// Prometheus keeps it (a whole free byte after byte-aligned writes) so
/// the chunks are its bytes.
struct BitStream {
    bytes: Vec<u8>,
    free: u32,
}

impl BitStream {
    fn bit(&mut self, on: bool) {
        if self.free == 0 {
            self.bytes.push(0);
            self.free = 8;
        }
        if on {
            *self.bytes.last_mut().expect("pushed above") |= 1 << (self.free - 1);
        }
        self.free -= 1;
    }

    fn byte(&mut self, b: u8) {
        if self.free == 0 {
            self.bytes.push(0);
            self.free = 8;
        }
        let last = self.bytes.last_mut().expect("pushed above");
        *last |= ((b as u16) >> (8 - self.free)) as u8;
        self.bytes.push(((b as u16) << self.free) as u8);
    }

    /// The `n` low bits of `u`, high to low.
    fn bits(&mut self, u: u64, n: u32) {
        let mut u = if n == 0 { 0 } else { u << (64 - n) };
        let mut n = n;
        while n >= 8 {
            self.byte((u >> 56) as u8);
            u <<= 8;
            n -= 8;
        }
        while n > 0 {
            self.bit(u >> 63 == 1);
            u <<= 1;
            n -= 1;
        }
    }

    fn uvarint(&mut self, mut x: u64) {
        while x >= 0x80 {
            self.byte(x as u8 | 0x80);
            x >>= 7;
        }
        self.byte(x as u8);
    }
}

/// Whether `x` fits Prometheus's `nbits` delta-of-delta bucket.
fn bit_range(x: i64, nbits: u32) -> bool {
    -((1i64 << (nbits - 1)) - 1) <= x && x <= 1i64 << (nbits - 1)
}

/// One XOR chunk of at most `u16::MAX` samples, sorted by time.
pub fn xor_chunk(samples: &[(i64, f64)]) -> Vec<u8> {
    let n = u16::try_from(samples.len()).expect("a chunk holds at most u16::MAX samples");
    let mut b = BitStream {
        bytes: n.to_be_bytes().to_vec(),
        free: 0,
    };
    let (mut t, mut v, mut t_delta) = (0i64, 0f64, 0u64);
    // 0xff: no leading/trailing window yet (a fresh chunk's appender).
    let (mut leading, mut trailing) = (0xffu32, 0u32);
    for (i, &(ts, val)) in samples.iter().enumerate() {
        match i {
            0 => {
                // Go's PutVarint: zig-zag, then uvarint.
                b.uvarint(((ts << 1) ^ (ts >> 63)) as u64);
                b.bits(val.to_bits(), 64);
            }
            1 => {
                t_delta = ts.wrapping_sub(t) as u64;
                b.uvarint(t_delta);
                xor_value(&mut b, val, v, &mut leading, &mut trailing);
            }
            _ => {
                let delta = ts.wrapping_sub(t) as u64;
                let dod = delta.wrapping_sub(t_delta) as i64;
                match dod {
                    0 => b.bit(false),
                    d if bit_range(d, 14) => {
                        b.bits(0b10, 2);
                        b.bits(d as u64, 14);
                    }
                    d if bit_range(d, 17) => {
                        b.bits(0b110, 3);
                        b.bits(d as u64, 17);
                    }
                    d if bit_range(d, 20) => {
                        b.bits(0b1110, 4);
                        b.bits(d as u64, 20);
                    }
                    d => {
                        b.bits(0b1111, 4);
                        b.bits(d as u64, 64);
                    }
                }
                t_delta = delta;
                xor_value(&mut b, val, v, &mut leading, &mut trailing);
            }
        }
        (t, v) = (ts, val);
    }
    b.bytes
}

/// Prometheus's `xorWrite`: the value XOR the previous one, in the
/// previous leading/trailing-zero window when it fits.
fn xor_value(b: &mut BitStream, new: f64, old: f64, leading: &mut u32, trailing: &mut u32) {
    let delta = new.to_bits() ^ old.to_bits();
    if delta == 0 {
        b.bit(false);
        return;
    }
    b.bit(true);
    let new_leading = delta.leading_zeros().min(31);
    let new_trailing = delta.trailing_zeros();
    if *leading != 0xff && new_leading >= *leading && new_trailing >= *trailing {
        b.bit(false);
        b.bits(delta >> *trailing, 64 - *leading - *trailing);
        return;
    }
    (*leading, *trailing) = (new_leading, new_trailing);
    b.bit(true);
    b.bits(new_leading as u64, 5);
    // 64 significant bits are written as 0 (6 bits), as Prometheus does.
    let sig = 64 - new_leading - new_trailing;
    b.bits(sig as u64, 6);
    b.bits(delta >> new_trailing, sig);
}

/// A series' samples (sorted by time) as XOR chunks.
pub fn chunks_of(samples: &[(i64, f64)]) -> Vec<Chunk> {
    samples
        .chunks(SAMPLES_PER_CHUNK)
        .map(|c| Chunk {
            min_time_ms: c[0].0,
            max_time_ms: c[c.len() - 1].0,
            r#type: ENCODING_XOR,
            data: xor_chunk(c),
        })
        .collect()
}

/// The frames answering query `index`: one series per frame, a series
/// split over several when its chunks pass `max_bytes` (the labels
/// counted, as Prometheus counts them). Series sorted by labels, samples
/// by time; a series without samples sends nothing.
pub fn query_frames(index: usize, mut series: Vec<Series>, max_bytes: usize, out: &mut Vec<u8>) {
    use prost::Message as _;
    series.sort_by(|a, b| a.labels.iter().cmp(b.labels.iter()));
    for mut s in series {
        s.samples.sort_by_key(|(t, _)| *t);
        let labels: Vec<Label> = s
            .labels
            .iter()
            .map(|(name, value)| Label {
                name: name.to_string(),
                value: value.to_string(),
            })
            .collect();
        let budget = max_bytes.saturating_sub(labels.iter().map(|l| l.encoded_len()).sum());
        let mut chunks: Vec<Chunk> = Vec::new();
        let mut left = budget as i64;
        let all = chunks_of(&s.samples);
        let last = all.len().saturating_sub(1);
        for (i, c) in all.into_iter().enumerate() {
            left -= c.encoded_len() as i64;
            chunks.push(c);
            if left > 0 && i < last {
                continue;
            }
            let msg = ChunkedReadResponse {
                chunked_series: vec![ChunkedSeries {
                    labels: labels.clone(),
                    chunks: std::mem::take(&mut chunks),
                }],
                query_index: index as i64,
            };
            frame(&msg.encode_to_vec(), out);
            left = budget as i64;
        }
    }
}

/// One frame as Prometheus's `ChunkedWriter` writes it.
pub fn frame(msg: &[u8], out: &mut Vec<u8>) {
    let mut n = msg.len() as u64;
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(&crc32c(msg).to_be_bytes());
    out.extend_from_slice(msg);
}

/// CRC-32C (Castagnoli), what Prometheus checks frames with.
pub fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::LazyLock<[u32; 256]> = std::sync::LazyLock::new(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0x82F6_3B78 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    !data.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use shardhouse_promql::Labels;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Bytes made by Prometheus v2.55.0's own `chunkenc.NewXORChunk` and
    /// `Append` for the same samples (a Go program run once, by hand).
    #[test]
    fn xor_chunks_are_prometheus_bytes() {
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let cases: [(&[(i64, f64)], &str); 4] = [
            (&[(1000, 1.0)], "0001d00f3ff000000000000000"),
            (
                &[(1000, 1.0), (2000, 1.0), (3000, 2.0), (4000, 0.5)],
                "0004d00f3ff0000000000000e8073097ffd7fe",
            ),
            (
                &[
                    (-5, 3.25),
                    (10, stale),
                    (15000, -7.0),
                    (15001, 1e300),
                    (100000000, 0.0),
                    (100000002, 42.0),
                ],
                "000609400a0000000000000fc5efff40000000000070e9ff07f7fd8000000000007715cebe2be4\
                 3c8800759de000000000beb4ccd3f1bf21e44003aceffffffffffa0a599b901140000000000000",
            ),
            (
                &[
                    (0, 1.0),
                    (10, 2.0),
                    (20, 3.0),
                    (8000, 4.0),
                    (80000, 5.0),
                    (600000, 6.0),
                    (1_000_000_000_000, 7.0),
                ],
                "0007003ff00000000000000ac25fff6c073e45ac2f3e853683e6d600d817e000001d1a927f2012",
            ),
        ];
        for (samples, want) in cases {
            assert_eq!(hex(&xor_chunk(samples)), want, "{samples:?}");
        }
    }

    #[test]
    fn crc32c_is_castagnoli() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// Reads frames back: (query index, labels, chunks).
    fn read_frames(mut b: &[u8]) -> Vec<ChunkedReadResponse> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let len = prost::encoding::decode_varint(&mut b).unwrap() as usize;
            let crc = u32::from_be_bytes(b[..4].try_into().unwrap());
            let msg = &b[4..4 + len];
            assert_eq!(crc, crc32c(msg));
            out.push(ChunkedReadResponse::decode(msg).unwrap());
            b = &b[4 + len..];
        }
        out
    }

    #[test]
    fn series_are_framed_one_per_frame_and_split_by_bytes() {
        let s = |job: &str, n: i64| Series {
            labels: Labels::from_pairs([("__name__", "up"), ("job", job)]),
            samples: (0..n).rev().map(|i| (i * 1000, i as f64)).collect(),
        };
        let mut out = Vec::new();
        query_frames(
            2,
            vec![s("b", 250), s("a", 1), s("empty", 0)],
            MAX_BYTES_IN_FRAME,
            &mut out,
        );
        let frames = read_frames(&out);
        assert_eq!(frames.len(), 2, "one frame per series with samples");
        assert!(frames
            .iter()
            .all(|f| f.query_index == 2 && f.chunked_series.len() == 1));
        assert_eq!(frames[0].chunked_series[0].labels[1].value, "a");
        let b = &frames[1].chunked_series[0];
        let spans: Vec<(i64, i64)> = b
            .chunks
            .iter()
            .map(|c| (c.min_time_ms, c.max_time_ms))
            .collect();
        assert_eq!(
            spans,
            [(0, 119_000), (120_000, 239_000), (240_000, 249_000)]
        );
        assert_eq!(
            &b.chunks[2].data[..2],
            &[0, 10],
            "10 samples in the last chunk"
        );
        // A tiny byte budget: every chunk in a frame of its own, labels repeated.
        let mut out = Vec::new();
        query_frames(0, vec![s("b", 250)], 10, &mut out);
        let frames = read_frames(&out);
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(
            |f| f.chunked_series[0].chunks.len() == 1 && f.chunked_series[0].labels.len() == 2
        ));
    }
}

//! Exact float accumulation, so that float `sum`, `mean` and `stddev`
//! partials merge to bit-identical answers however the points were split
//! across shards.
//!
//! Why: IEEE addition is not associative. InfluxDB 1.8 adds floats one by
//! one in the order its merge iterator yields them, so even InfluxDB's own
//! answer depends on how points fall into shards and series. Here a sum is
//! kept as a Shewchuk expansion (non-overlapping partials whose exact sum is
//! the exact sum of the inputs) and rounded once at the end (the final step
//! of Python's `math.fsum`): the result is the correctly rounded exact sum,
//! independent of order and split. It can differ from InfluxDB's
//! left-to-right sum in the last bits, by at most InfluxDB's own rounding
//! error (`(n-1)·eps·Σ|x|`).
//!
//! `stddev` keeps `n`, `Σx` and `Σx²` exactly (`x²` as a two-product via
//! fused multiply-add), computes `n·Σx² − (Σx)²` exactly and rounds it once,
//! then divides by `n·(n−1)` and takes the square root: three roundings in
//! all, again independent of the split. InfluxDB's two-pass formula rounds
//! differently, so results agree with InfluxDB to a few ulps.
//!
//! Limits: exactness needs the products to stay within f64's normal range
//! (|x| between about 1e-145 and 1e154 for `stddev`); a sum whose running
//! total passes f64's maximum becomes ±inf. Outside that range results are
//! still deterministic per split but not split-independent.

use serde::{Deserialize, Serialize};

/// The exact sum of any number of finite floats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExactSum {
    /// Non-overlapping partials in increasing magnitude.
    partials: Vec<f64>,
    /// The sum of non-finite inputs (±inf, NaN); 0 when there were none.
    special: f64,
}

impl ExactSum {
    pub fn new() -> Self {
        ExactSum::default()
    }

    /// Adds `x` exactly.
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            self.special += x;
            return;
        }
        let mut x = x;
        let mut kept = 0;
        for j in 0..self.partials.len() {
            let mut y = self.partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            if !hi.is_finite() {
                // The running total left f64's range: no exact answer fits.
                self.special += hi;
                self.partials.clear();
                return;
            }
            let lo = y - (hi - x);
            if lo != 0.0 {
                self.partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        self.partials.truncate(kept);
        self.partials.push(x);
    }

    /// Adds `a·b` exactly (its rounded product plus the rounding error).
    pub fn add_product(&mut self, a: f64, b: f64) {
        let product = a * b;
        if !product.is_finite() {
            self.special += product;
            return;
        }
        self.add(product);
        self.add(a.mul_add(b, -product));
    }

    /// Adds everything `other` holds.
    pub fn merge(&mut self, other: &ExactSum) {
        for &p in &other.partials {
            self.add(p);
        }
        self.special += other.special;
    }

    /// The exact sum rounded to the nearest float (ties to even).
    pub fn value(&self) -> f64 {
        if self.special != 0.0 || self.special.is_nan() {
            return self.special;
        }
        let p = &self.partials;
        let Some(&top) = p.last() else {
            return 0.0;
        };
        let mut n = p.len() - 1;
        let mut hi = top;
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = p[n];
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        // Round half-way cases correctly: if the rest has the same sign as
        // the rounding error, the error is not exactly half an ulp.
        if n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            if y == x - hi {
                hi = x;
            }
        }
        hi
    }
}

/// `n`, `Σx` and `Σx²`, exactly: the partial state of `stddev`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    pub n: u64,
    pub sum: ExactSum,
    pub sum_sq: ExactSum,
}

impl Moments {
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        self.sum.add(x);
        self.sum_sq.add_product(x, x);
    }

    pub fn merge(&mut self, other: &Moments) {
        self.n += other.n;
        self.sum.merge(&other.sum);
        self.sum_sq.merge(&other.sum_sq);
    }

    /// The sample standard deviation; NaN (InfluxDB's null) for fewer than
    /// two values or non-finite input.
    pub fn sample_stddev(&self) -> f64 {
        if self.n < 2 || self.sum.special != 0.0 || self.sum_sq.special != 0.0 {
            return f64::NAN;
        }
        let n = self.n as f64;
        // n·Σx² − (Σx)², exactly, rounded once.
        let mut spread = ExactSum::new();
        for &q in &self.sum_sq.partials {
            spread.add_product(n, q);
        }
        for &a in &self.sum.partials {
            for &b in &self.sum.partials {
                spread.add_product(-a, b);
            }
        }
        let spread = spread.value().max(0.0);
        (spread / (n * (n - 1.0))).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_of(values: &[f64]) -> f64 {
        let mut s = ExactSum::new();
        for &v in values {
            s.add(v);
        }
        s.value()
    }

    #[test]
    fn sums_are_correctly_rounded() {
        assert_eq!(sum_of(&[]), 0.0);
        assert_eq!(sum_of(&[0.1, 0.2, 0.3]), 0.6);
        // Naive left-to-right gives 0.6000000000000001.
        assert_ne!(0.1 + 0.2 + 0.3, 0.6);
        assert_eq!(sum_of(&[1e100, 1.0, -1e100]), 1.0);
        assert_eq!(sum_of(&[1e308, 1e308, -1e308]), f64::INFINITY);
        assert_eq!(sum_of(&[f64::INFINITY, 1.0]), f64::INFINITY);
        assert!(sum_of(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        // Half-way case: 1 + 2^-53 + 2^-106 rounds up, not to even.
        let tiny = 2f64.powi(-53);
        assert_eq!(sum_of(&[1.0, tiny, tiny * tiny]), 1.0 + 2.0 * tiny);
        assert_eq!(sum_of(&[1.0, tiny]), 1.0);
    }

    #[test]
    fn merge_is_split_independent() {
        let values: Vec<f64> = (0..200)
            .map(|i| ((i * 7919) % 1000) as f64 * 1.1e-3 + if i % 3 == 0 { 1e12 } else { -3.3 })
            .collect();
        let whole = sum_of(&values);
        for cut in [1, 17, 100, 199] {
            let mut a = ExactSum::new();
            let mut b = ExactSum::new();
            values[..cut].iter().for_each(|&v| a.add(v));
            values[cut..].iter().for_each(|&v| b.add(v));
            b.merge(&a);
            assert_eq!(b.value().to_bits(), whole.to_bits());
        }
    }

    #[test]
    fn stddev_matches_influxdb_examples() {
        let mut m = Moments::default();
        [20.0, 19.0].iter().for_each(|&v| m.push(v));
        assert_eq!(m.sample_stddev(), std::f64::consts::FRAC_1_SQRT_2);
        let mut m = Moments::default();
        [1.0, 2.0, 3.0, 4.0, 5.0].iter().for_each(|&v| m.push(v));
        assert_eq!(m.sample_stddev(), 1.5811388300841898);
        let mut one = Moments::default();
        one.push(3.0);
        assert!(one.sample_stddev().is_nan());
        // Large offset, tiny spread: the naive one-pass formula loses it all.
        let mut m = Moments::default();
        [1e9 + 4.0, 1e9 + 7.0, 1e9 + 13.0, 1e9 + 16.0]
            .iter()
            .for_each(|&v| m.push(v));
        assert_eq!(m.sample_stddev(), 30f64.sqrt());
    }
}

// Open-model ramp (constant arrival rate) for people who use k6: one step
// per run, like the ingest ramp study. The payload is pre-encoded by
// `shardhouse-loadtest payload` so k6 never encodes anything.
//
//   shardhouse-loadtest payload --dataset low --batch 1000 --out /tmp/payload.lp
//   for R in 25 50 100 150 200; do
//     RATE=$R PAYLOAD_FILE=/tmp/payload.lp POINTS_PER_REQUEST=1000 DURATION=20s \
//       k6 run --quiet loadtest/k6/ramp.js
//   done
//
// Env: URL (default http://127.0.0.1:8086), WRITE_PATH (default
// /write?db=shardhouse; QuestDB: /write), CONTENT_TYPE, RATE (req/s),
// DURATION, MAX_VUS, POINTS_PER_REQUEST, TOKEN.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const URL = (__ENV.URL || 'http://127.0.0.1:8086') + (__ENV.WRITE_PATH || '/write?db=shardhouse');
const PAYLOAD = open(__ENV.PAYLOAD_FILE, 'b');
const POINTS = parseInt(__ENV.POINTS_PER_REQUEST || '1000');
const RATE = parseInt(__ENV.RATE || '10');
const points = new Counter('points_acked');

const headers = { 'Content-Type': __ENV.CONTENT_TYPE || 'text/plain; charset=utf-8' };
if (__ENV.TOKEN) headers['Authorization'] = `Token ${__ENV.TOKEN}`;

export const options = {
  discardResponseBodies: true,
  scenarios: {
    ramp_step: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: __ENV.DURATION || '20s',
      // A request due while every VU is busy is dropped (dropped_iterations),
      // never queued: that is the saturation signal.
      preAllocatedVUs: Math.max(RATE, 10),
      maxVUs: parseInt(__ENV.MAX_VUS || '256'),
    },
  },
  summaryTrendStats: ['p(50)', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  const res = http.post(URL, PAYLOAD, { headers, timeout: '10s' });
  if (check(res, { 'status is 204': (r) => r.status === 204 })) {
    points.add(POINTS);
  }
}

// Closed model (N virtual users, each sends as soon as its previous request
// returned), for contrast with ramp.js: it never drops, it only queues.
//
//   for V in 4 16 64; do
//     VUS=$V PAYLOAD_FILE=/tmp/payload.lp POINTS_PER_REQUEST=1000 DURATION=15s \
//       k6 run --quiet loadtest/k6/closed.js
//   done
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const URL = (__ENV.URL || 'http://127.0.0.1:8086') + (__ENV.WRITE_PATH || '/write?db=shardhouse');
const PAYLOAD = open(__ENV.PAYLOAD_FILE, 'b');
const POINTS = parseInt(__ENV.POINTS_PER_REQUEST || '1000');
const points = new Counter('points_acked');

const headers = { 'Content-Type': __ENV.CONTENT_TYPE || 'text/plain; charset=utf-8' };
if (__ENV.TOKEN) headers['Authorization'] = `Token ${__ENV.TOKEN}`;

export const options = {
  discardResponseBodies: true,
  scenarios: {
    closed: {
      executor: 'constant-vus',
      vus: parseInt(__ENV.VUS || '16'),
      duration: __ENV.DURATION || '15s',
    },
  },
  summaryTrendStats: ['p(50)', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  const res = http.post(URL, PAYLOAD, { headers, timeout: '60s' });
  if (check(res, { 'status is 204': (r) => r.status === 204 })) {
    points.add(POINTS);
  }
}

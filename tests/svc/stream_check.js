// stream_check.js - streamed jobs through kafkajs (a Kafka client that is
// not librdkafka): produce jobs, consume confkv.stream and confkv.results
// in one consumer, and check what docs/SERVICE.md (Streaming) promises.
//
// Usage: node stream_check.js BROKERS JOBS.jsonl OUT.json
//   JOBS.jsonl: one job a line, plus test fields taken off before sending:
//     "_enc": "msgpack" sends it as msgpack; "_expect": "stream" (ok, with
//     a stream), "stream_error" (an error result, its stream one end
//     record with the same error), "no_stream" (no stream records).
// Checks, per job: the records come in seq order 0, 1, 2, ... with done
// only on the last; all of them were on the broker before the result
// arrived: their timestamps are not after the result's, and when the
// result is consumed the stream partition's end offset is already past
// the end record (so a consumer that has the result can read the whole
// stream; one consumer of both topics may still be handed a fetch's
// results batch before its stream batch: Kafka orders records within a
// partition only); the deltas, concatenated, equal the result's text; the
// end record's error is the result's. OUT.json gets
// per job: records, instance, completion tokens, total_ms (for the
// coalescing bound the shell checks). Exit 0 when every check held.
'use strict';
const fs = require('fs');
const path = require('path');
const depsDir = process.env.CONFKV_DEPS_DIR || path.join(process.env.HOME, '.cache/confkv');
const { Kafka, logLevel } = require(path.join(depsDir, 'npm-kafkajs/node_modules/kafkajs'));

// ---- a small msgpack codec (maps, arrays, strings, numbers, bools, nil)
function mpEncode(v) {
  const out = [];
  const put = (...b) => out.push(Buffer.from(b));
  const enc = (x) => {
    if (x === null || x === undefined) return put(0xc0);
    if (x === true) return put(0xc3);
    if (x === false) return put(0xc2);
    if (typeof x === 'number') {
      if (Number.isInteger(x) && x >= 0 && x < 128) return put(x);
      const b = Buffer.alloc(9);
      b[0] = 0xcb;
      b.writeDoubleBE(x, 1);
      return out.push(b);
    }
    if (typeof x === 'string') {
      const s = Buffer.from(x, 'utf8');
      const h = Buffer.alloc(5);
      h[0] = 0xdb;
      h.writeUInt32BE(s.length, 1);
      out.push(h, s);
      return;
    }
    if (Array.isArray(x)) {
      const h = Buffer.alloc(5);
      h[0] = 0xdd;
      h.writeUInt32BE(x.length, 1);
      out.push(h);
      return x.forEach(enc);
    }
    const keys = Object.keys(x);
    const h = Buffer.alloc(5);
    h[0] = 0xdf;
    h.writeUInt32BE(keys.length, 1);
    out.push(h);
    for (const k of keys) {
      enc(k);
      enc(x[k]);
    }
  };
  enc(v);
  return Buffer.concat(out);
}

function mpDecode(buf) {
  let p = 0;
  const str = (n) => {
    const s = buf.toString('utf8', p, p + n);
    p += n;
    return s;
  };
  const map = (n) => {
    const o = {};
    for (let i = 0; i < n; i++) {
      const k = dec();
      o[k] = dec();
    }
    return o;
  };
  const arr = (n) => {
    const a = [];
    for (let i = 0; i < n; i++) a.push(dec());
    return a;
  };
  const dec = () => {
    const b = buf[p++];
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 256;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    let v;
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xca: v = buf.readFloatBE(p); p += 4; return v;
      case 0xcb: v = buf.readDoubleBE(p); p += 8; return v;
      case 0xcc: return buf[p++];
      case 0xcd: v = buf.readUInt16BE(p); p += 2; return v;
      case 0xce: v = buf.readUInt32BE(p); p += 4; return v;
      case 0xcf: v = Number(buf.readBigUInt64BE(p)); p += 8; return v;
      case 0xd0: return buf.readInt8(p++);
      case 0xd1: v = buf.readInt16BE(p); p += 2; return v;
      case 0xd2: v = buf.readInt32BE(p); p += 4; return v;
      case 0xd3: v = Number(buf.readBigInt64BE(p)); p += 8; return v;
      case 0xd9: return str(buf[p++]);
      case 0xda: v = buf.readUInt16BE(p); p += 2; return str(v);
      case 0xdb: v = buf.readUInt32BE(p); p += 4; return str(v);
      case 0xdc: v = buf.readUInt16BE(p); p += 2; return arr(v);
      case 0xdd: v = buf.readUInt32BE(p); p += 4; return arr(v);
      case 0xde: v = buf.readUInt16BE(p); p += 2; return map(v);
      case 0xdf: v = buf.readUInt32BE(p); p += 4; return map(v);
    }
    throw new Error('msgpack: unsupported byte 0x' + b.toString(16));
  };
  const v = dec();
  if (p !== buf.length) throw new Error('msgpack: trailing bytes');
  return v;
}

function decode(m) {
  const ct = m.headers && m.headers['content-type'] ? m.headers['content-type'].toString() : '';
  return ct.includes('msgpack') ? mpDecode(m.value) : JSON.parse(m.value.toString('utf8'));
}

async function main() {
  const [brokers, jobsFile, outFile] = process.argv.slice(2);
  const jobs = fs.readFileSync(jobsFile, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  const want = new Map(jobs.map((j) => [j.id, j._expect]));
  const kafka = new Kafka({ clientId: 'stream-check', brokers: [brokers], logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({ groupId: 'stream-check-' + process.pid, maxWaitTimeInMs: 100 });
  const producer = kafka.producer();
  const admin = kafka.admin();
  await admin.connect();
  let resultFirst = 0; // results this consumer was handed before the job's end record
  const seen = new Map(); // id -> {records: [{rec, order, ts}], result, resultOrder, resultTs}
  const entry = (id) => {
    if (!seen.has(id)) seen.set(id, { records: [], result: null });
    return seen.get(id);
  };
  let order = 0;
  const errors = [];
  const complete = () =>
    jobs.every((j) => {
      const e = seen.get(j.id);
      if (!e || !e.result) return false;
      return j._expect === 'no_stream' || e.records.some((r) => r.rec.done === true);
    });
  let resolveDone;
  const finished = new Promise((r) => (resolveDone = r));

  await consumer.connect();
  // The stream topic first: within one fetch answer its batches come first.
  await consumer.subscribe({ topics: ['confkv.stream', 'confkv.results'], fromBeginning: true });
  const joined = new Promise((r) => consumer.on(consumer.events.GROUP_JOIN, r));
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      const id = message.key ? message.key.toString('utf8') : '';
      if (!want.has(id)) return;
      let v;
      try {
        v = decode(message);
      } catch (e) {
        errors.push(`${id}: ${topic} record does not decode: ${e.message}`);
        return;
      }
      const e = entry(id);
      if (topic === 'confkv.stream') {
        e.records.push({ rec: v, order: order++, ts: Number(message.timestamp), partition, offset: Number(message.offset) });
      } else if (!e.result) {
        // where the stream partitions end now, while the result is in hand
        const ends = {};
        for (const o of await admin.fetchTopicOffsets('confkv.stream')) ends[o.partition] = Number(o.high);
        if (!e.records.some((r) => r.rec.done === true)) resultFirst++;
        Object.assign(e, { result: v, resultOrder: order++, resultTs: Number(message.timestamp), ends });
      }
      if (complete()) resolveDone();
    },
  });
  await joined;
  await producer.connect();
  await producer.send({
    topic: 'confkv.jobs',
    messages: jobs.map((j) => {
      const job = Object.fromEntries(Object.entries(j).filter(([k]) => !k.startsWith('_')));
      const mp = j._enc === 'msgpack';
      return {
        key: j.id,
        value: mp ? mpEncode(job) : JSON.stringify(job),
        headers: { 'content-type': mp ? 'application/msgpack' : 'application/json' },
      };
    }),
  });
  const timer = setTimeout(() => resolveDone('timeout'), 120000);
  const how = await finished;
  clearTimeout(timer);
  if (how === 'timeout') errors.push('timed out waiting for the results and stream ends');

  const out = {};
  let multibyte = 0;
  for (const j of jobs) {
    const e = seen.get(j.id) || { records: [], result: null };
    const r = e.result;
    const fail = (msg) => errors.push(`${j.id}: ${msg}`);
    if (!r) {
      fail('no result');
      continue;
    }
    const recs = e.records;
    out[j.id] = {
      records: recs.length,
      instance: r.instance,
      model: r.model,
      completion_tokens: r.usage ? r.usage.completion_tokens : 0,
      total_ms: r.timings ? r.timings.total_ms : 0,
      escalated: r.route ? r.route.escalated : null,
    };
    if (j._expect === 'no_stream') {
      if (recs.length) fail(`${recs.length} stream records for a job without a stream`);
      continue;
    }
    recs.forEach((x, i) => {
      if (x.rec.id !== j.id) fail(`record ${i} has id ${x.rec.id}`);
      if (x.rec.seq !== i) fail(`record ${i} arrived with seq ${x.rec.seq}`);
      if (typeof x.rec.delta !== 'string') fail(`record ${i}: delta is not a string`);
      if ((x.rec.done === true) !== (i === recs.length - 1)) fail(`record ${i}: done=${x.rec.done}`);
      if (x.order > e.resultOrder && !(x.offset < e.ends[x.partition]))
        fail(`record ${i} (offset ${x.offset}) was not on the broker when the result arrived (end ${e.ends[x.partition]})`);
      if (x.ts > e.resultTs) fail(`record ${i}'s timestamp ${x.ts} is after the result's ${e.resultTs}`);
    });
    if (!recs.length) {
      fail('no stream records');
      continue;
    }
    const last = recs[recs.length - 1].rec;
    if (j._expect === 'stream') {
      if (r.status !== 'ok') fail(`status ${r.status}: ${JSON.stringify(r.error)}`);
      const text = recs.map((x) => x.rec.delta).join('');
      if (text !== r.text) fail(`deltas ${JSON.stringify(text)} != text ${JSON.stringify(r.text)}`);
      if (last.error !== null) fail(`end record error ${JSON.stringify(last.error)}`);
      if (/[^\x00-\x7f]/.test(r.text || '')) multibyte++;
    } else {
      if (r.status !== 'error') fail(`status ${r.status}, an error was expected`);
      if (recs.length !== 1 || last.delta !== '') fail('an error job streams one empty end record');
      if (!last.error || !r.error || last.error.code !== r.error.code)
        fail(`end record error ${JSON.stringify(last.error)} vs result ${JSON.stringify(r.error)}`);
    }
  }
  out._multibyte_texts = multibyte;
  out._results_before_stream_end = resultFirst;
  out._errors = errors;
  fs.writeFileSync(outFile, JSON.stringify(out, null, 1));
  // every record, decoded (for the schema check)
  const all = [];
  for (const e of seen.values()) for (const x of e.records) all.push(JSON.stringify(x.rec));
  fs.writeFileSync(outFile + '.records.jsonl', all.join('\n') + '\n');
  await producer.disconnect();
  await consumer.disconnect();
  await admin.disconnect();
  for (const e of errors.slice(0, 30)) console.error('FAIL ' + e);
  process.exit(errors.length ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});

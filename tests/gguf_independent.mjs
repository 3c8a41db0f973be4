// gguf_independent.mjs - check a GGUF file with an independent parser,
// @huggingface/gguf (not our code), and compare what it sees with what we
// expect.
//
//   node gguf_independent.mjs PKGDIR FILE [EXPECTED.json]
//
// PKGDIR is the npm prefix where @huggingface/gguf is installed. Without
// EXPECTED, only the structural checks run. EXPECTED is the JSON printed by
// `test_gguf --write-sample` (what the writer meant to write) or
// `test_gguf --describe FILE` (what our reader sees):
//   {"version":3,"kv":[{"key","type","subtype"?,"value"}],
//    "tensors":[{"name","type","shape":[ne0,...],"first":[f32,...]}]}
// with 64-bit integers as strings and non-finite floats as "nan"/"inf".
//
// Structural checks (always): known tensor types, ne[0] a multiple of the
// block size, data offsets aligned, data inside the file, no overlaps.
// With EXPECTED: version, every key with its type, element type and value,
// no extra keys, tensor count, names and order, shapes, types, and the first
// elements of each tensor decoded here from the file's bytes.
//
// Prints a JSON summary on stdout; exits 0 if everything matches, 1 with
// the reasons on stderr otherwise, 2 on usage errors.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [pkgDir, file, expectedPath] = process.argv.slice(2);
if (!pkgDir || !file) {
  console.error("usage: node gguf_independent.mjs PKGDIR FILE [EXPECTED.json]");
  process.exit(2);
}

const require = createRequire(path.join(path.resolve(pkgDir), "noop.js"));
const lib = await import(pathToFileURL(require.resolve("@huggingface/gguf")).href);

const problems = [];
const problem = (msg) => problems.push(msg);

// ggml type id -> [block elements, block bytes] for the types confkv writes
const TYPES = { 0: [1, 4], 1: [1, 2], 8: [32, 34], 30: [1, 2] };
const PSEUDO_KEYS = new Set(["version", "tensor_count", "kv_count"]);

const parsed = await lib.gguf(path.resolve(file), {
  allowLocalFile: true,
  typedMetadata: true,
});
const { metadata, typedMetadata, tensorInfos, tensorDataOffset } = parsed;
const fileSize = BigInt(fs.statSync(file).size);
const alignment = BigInt(metadata["general.alignment"] ?? 32);
if (!parsed.littleEndian) problem("file parsed as big-endian");

// ---- structural checks ----------------------------------------------------
if (tensorDataOffset % alignment !== 0n)
  problem(`data section offset ${tensorDataOffset} not aligned to ${alignment}`);
const spans = [];
for (const t of tensorInfos) {
  const ty = TYPES[t.dtype];
  if (!ty) {
    problem(`tensor ${t.name}: type ${t.dtype} is not one confkv writes`);
    continue;
  }
  const [be, bb] = ty;
  if (t.shape.length < 1 || t.shape.length > 4) problem(`tensor ${t.name}: ${t.shape.length} dims`);
  if (t.shape[0] % BigInt(be) !== 0n) problem(`tensor ${t.name}: ne[0] ${t.shape[0]} not a multiple of ${be}`);
  const rows = t.shape.slice(1).reduce((a, b) => a * b, 1n);
  const nbytes = (t.shape[0] / BigInt(be)) * BigInt(bb) * rows;
  if (t.offset % alignment !== 0n) problem(`tensor ${t.name}: offset ${t.offset} not aligned`);
  const start = tensorDataOffset + t.offset;
  if (start + nbytes > fileSize)
    problem(`tensor ${t.name}: data [${start}, +${nbytes}) past the end of the file (${fileSize})`);
  spans.push({ name: t.name, start, end: start + nbytes, nbytes });
}
spans.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
for (let i = 1; i < spans.length; i++)
  if (spans[i].start < spans[i - 1].end)
    problem(`tensor ${spans[i].name} overlaps ${spans[i - 1].name}`);

// ---- decoding the first elements ------------------------------------------
function half(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
const fd = fs.openSync(file, "r");
function firstValues(t) {
  const span = spans.find((s) => s.name === t.name);
  if (!span) return [];
  const n = Number(span.nbytes < 256n ? span.nbytes : 256n);
  const buf = Buffer.alloc(n);
  fs.readSync(fd, buf, 0, n, Number(span.start));
  const dv = new DataView(buf.buffer, buf.byteOffset, n);
  const out = [];
  const elems = Number(t.shape.reduce((a, b) => a * b, 1n));
  const count = Math.min(4, elems);
  for (let i = 0; i < count; i++) {
    switch (t.dtype) {
      case 0: out.push(dv.getFloat32(4 * i, true)); break;
      case 1: out.push(half(dv.getUint16(2 * i, true))); break;
      case 30: {
        const b = new DataView(new ArrayBuffer(4));
        b.setUint32(0, dv.getUint16(2 * i, true) << 16);
        out.push(b.getFloat32(0));
        break;
      }
      case 8: out.push(Math.fround(half(dv.getUint16(0, true)) * dv.getInt8(2 + i))); break;
    }
  }
  return out;
}

// ---- comparison with the expectation --------------------------------------
// Values as the C side prints them: 64-bit integers (bigint) as strings,
// non-finite numbers as strings, bools as bools.
function norm(v) {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number" && !Number.isFinite(v))
    return Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf";
  if (Array.isArray(v)) return v.map(norm);
  return v;
}
function same(a, b, f32) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length &&
      a.every((x, i) => same(x, b[i], f32));
  }
  if (typeof a === "number" && typeof b === "number")
    return f32 ? Math.fround(a) === Math.fround(b) : a === b;
  return a === b;
}
const show = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? x.toString() : x));

const keys = Object.keys(typedMetadata).filter((k) => !PSEUDO_KEYS.has(k));
if (expectedPath) {
  const exp = JSON.parse(fs.readFileSync(expectedPath, "utf8"));
  if (metadata.version !== exp.version) problem(`version ${metadata.version}, expected ${exp.version}`);
  const expKeys = new Set(exp.kv.map((k) => k.key));
  for (const k of keys) if (!expKeys.has(k)) problem(`unexpected key ${k}`);
  if (Number(metadata.kv_count) !== exp.kv.length)
    problem(`kv_count ${metadata.kv_count}, expected ${exp.kv.length}`);
  for (const e of exp.kv) {
    const got = typedMetadata[e.key];
    if (!got) { problem(`missing key ${e.key}`); continue; }
    if (got.type !== e.type) problem(`key ${e.key}: type ${got.type}, expected ${e.type}`);
    if (e.subtype !== undefined && got.subType !== e.subtype)
      problem(`key ${e.key}: element type ${got.subType}, expected ${e.subtype}`);
    const f32 = e.type === 6 || e.subtype === 6;
    if (!same(norm(got.value), e.value, f32))
      problem(`key ${e.key}: value ${show(norm(got.value)).slice(0, 200)}, expected ${show(e.value).slice(0, 200)}`);
  }
  if (tensorInfos.length !== exp.tensors.length)
    problem(`${tensorInfos.length} tensors, expected ${exp.tensors.length}`);
  exp.tensors.forEach((e, i) => {
    const t = tensorInfos[i];
    if (!t) return;
    if (t.name !== e.name) problem(`tensor ${i}: name ${t.name}, expected ${e.name}`);
    if (t.dtype !== e.type) problem(`tensor ${e.name}: type ${t.dtype}, expected ${e.type}`);
    const shape = t.shape.map(Number);
    if (!same(shape, e.shape)) problem(`tensor ${e.name}: shape ${show(shape)}, expected ${show(e.shape)}`);
    const first = norm(firstValues(t));
    if (!same(first, e.first, true))
      problem(`tensor ${e.name}: first values ${show(first)}, expected ${show(e.first)}`);
  });
}
fs.closeSync(fd);

console.log(JSON.stringify({
  parser: "@huggingface/gguf",
  file,
  version: metadata.version,
  alignment: Number(alignment),
  data_offset: Number(tensorDataOffset),
  keys,
  tensors: tensorInfos.map((t) => ({ name: t.name, type: t.dtype, shape: t.shape.map(Number) })),
  checked_against: expectedPath ?? null,
  problems,
}, null, 1));
if (problems.length) {
  for (const p of problems) console.error(`gguf_independent: ${p}`);
  process.exit(1);
}

// A JavaScript client of the JSON API, as a browser would be: it checks that
// IDs arrive as strings that BigInt reads exactly, and that IDs sent back as
// strings are accepted. Usage: node client.mjs BASE_URL EXPECTED_ID
const [base, expected] = process.argv.slice(2);
const out = {};

const list = await (await fetch(`${base}/photos`)).json();
const photo = list.find((p) => p.id === expected);
out.found = photo !== undefined;
out.idIsString = typeof photo?.id === 'string';
out.bigIntExact = photo !== undefined && BigInt(photo.id).toString() === expected;
// What a plain number would have done to the same ID:
out.numberLosesDigits = String(Number(expected)) !== expected;

// Send the ID back, as a string, in a reply.
const res = await fetch(`${base}/photos`, {
  method: 'POST',
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ user_id: '31341', caption: 'reply', reply_to: photo.id }),
});
const created = await res.json();
out.postStatus = res.status;
out.replyToKept = created.reply_to === expected;
out.newIdIsString = typeof created.id === 'string' && created.id !== expected;

const one = await (await fetch(`${base}/photos/${created.id}`)).json();
out.getById = one.id === created.id && one.reply_to === expected;

console.log(JSON.stringify(out));

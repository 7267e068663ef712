"""Recomputes the hash chain over the event log without the ledger's code (docs/hash-chain.md).

    psql "$DATABASE_URL" -XAt -F ' ' -c "$(python3 scripts/recompute_chain.py --query)" | python3 scripts/recompute_chain.py

Reads `position stream_hex key_hex type_hex source recorded_us raw_sha256_hex stored_hash_hex` lines
on standard input; exits 1 naming the first position whose stored link differs.
"""
import hashlib
import struct
import sys

QUERY = """SELECT e.position, encode(convert_to(e.stream_id, 'UTF8'), 'hex'), encode(convert_to(e.dedupe_key, 'UTF8'), 'hex'),
       encode(convert_to(e.type, 'UTF8'), 'hex'), e.source, (extract(epoch FROM e.recorded_at) * 1000000)::bigint,
       encode(sha256(e.raw), 'hex'), encode(c.hash, 'hex')
FROM events e JOIN event_chain c USING (position) ORDER BY e.position"""

if "--query" in sys.argv:
    print(QUERY)
    sys.exit(0)

previous, position, count = bytes(32), "0", 0
for line in sys.stdin:
    position, stream, key, kind, source, micros, raw, stored = line.split()
    message = previous + struct.pack(">q", int(position))
    for field in (bytes.fromhex(stream), bytes.fromhex(key), bytes.fromhex(kind), source.encode()):
        message += struct.pack(">I", len(field)) + field
    message += struct.pack(">q", int(micros)) + bytes.fromhex(raw)
    previous = hashlib.sha256(message).digest()
    count += 1
    if previous.hex() != stored:
        print(f"recompute_chain: position {position}: the stored link differs from the recomputed one", file=sys.stderr)
        sys.exit(1)
print(f"recompute_chain: {count} links hold, head {position} {previous.hex()}")

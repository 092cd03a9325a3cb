"""A client of Envoy's rate limit service that shareplane did not write: grpcio, with the
messages of envoy/service/ratelimit/v3/rls.proto encoded and decoded by hand here (field numbers
from that file), so that nothing of the gateway's own generated code is on this side.

Usage: python rls_client.py HOST:PORT CALLS_JSON
CALLS_JSON is a list of calls, each {"domain": str, "descriptors": [[[key, value], ...], ...],
"hits_addend": int, optional "descriptor_hits": [int or null, ...], optional "repeat": int}.
Prints one JSON line: per call, the list of decoded answers (one per repetition), each
{"overall_code", "statuses": [...], "headers": {...}} or {"error": grpc status name, "details"}.
"""

import json
import sys

import grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}
UNITS = {0: "UNKNOWN", 1: "SECOND", 2: "MINUTE", 3: "HOUR", 4: "DAY", 5: "MONTH", 6: "YEAR", 7: "WEEK"}


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_len(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def field_varint(num, v):
    return varint(num << 3 | 0) + varint(v)


def encode_request(call):
    msg = field_len(1, call.get("domain", "").encode())
    hits = call.get("descriptor_hits") or []
    for i, entries in enumerate(call["descriptors"]):
        d = b"".join(field_len(1, field_len(1, k.encode()) + field_len(2, v.encode())) for k, v in entries)
        if i < len(hits) and hits[i] is not None:
            d += field_len(3, field_varint(1, hits[i]))  # google.protobuf.UInt64Value
        msg += field_len(2, d)
    if call.get("hits_addend"):
        msg += field_varint(3, call["hits_addend"])
    return msg


def read_varint(buf, i):
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fields(buf):
    """(field number, wire type, value) of a message; values are ints or bytes."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i : i + n], i + n
        elif wt == 1:
            v, i = buf[i : i + 8], i + 8
        elif wt == 5:
            v, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def decode_status(buf):
    s = {"code": "UNKNOWN", "limit_remaining": 0}
    for num, _, v in fields(buf):
        if num == 1:
            s["code"] = CODES.get(v, str(v))
        elif num == 2:
            lim = {"requests_per_unit": 0, "unit": "UNKNOWN", "name": ""}
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    lim["requests_per_unit"] = v2
                elif n2 == 2:
                    lim["unit"] = UNITS.get(v2, str(v2))
                elif n2 == 3:
                    lim["name"] = v2.decode()
            s["current_limit"] = lim
        elif num == 3:
            s["limit_remaining"] = v
        elif num == 4:
            secs = nanos = 0
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    secs = v2
                elif n2 == 2:
                    nanos = v2
            s["duration_until_reset_s"] = secs + nanos / 1e9
    return s


def decode_response(buf):
    r = {"overall_code": "UNKNOWN", "statuses": [], "headers": {}}
    for num, _, v in fields(buf):
        if num == 1:
            r["overall_code"] = CODES.get(v, str(v))
        elif num == 2:
            r["statuses"].append(decode_status(v))
        elif num == 3:
            kv = {n2: v2 for n2, _, v2 in fields(v)}
            r["headers"][kv.get(1, b"").decode()] = kv.get(2, b"").decode()
    return r


def main():
    target, calls = sys.argv[1], json.loads(sys.argv[2])
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        rpc = channel.unary_unary(METHOD)  # no serializers: bytes in, bytes out
        out = []
        for call in calls:
            answers = []
            for _ in range(call.get("repeat", 1)):
                try:
                    answers.append(decode_response(rpc(encode_request(call), timeout=10)))
                except grpc.RpcError as e:
                    answers.append({"error": e.code().name, "details": e.details()})
            out.append(answers)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Validate pushed messages against pmw's published schemas, independently of the Rust types.

Input (stdin): {"asyncapi": <doc>, "openapi": <doc>, "frames": [...], "bodies": [...]}.
Each WebSocket frame is validated against the AsyncAPI message of its `type`, each webhook body
against the OpenAPI `webhooks` entry of its `type` (JSON Schema 2020-12, `$ref`s resolved in
their document). Prints one line per failure and exits 1 on any; else prints the counts.
"""
import json
import sys

import jsonschema


def validator(schema, doc):
    rooted = dict(schema)
    rooted["components"] = doc["components"]
    return jsonschema.Draft202012Validator(rooted)


def main():
    d = json.load(sys.stdin)
    failures = []
    counts = {}
    messages = d["asyncapi"]["components"]["messages"]
    for f in d["frames"]:
        kind = f.get("type")
        if kind not in messages:
            failures.append(f"frame of unknown type {kind!r}: {f}")
            continue
        for e in validator(messages[kind]["payload"], d["asyncapi"]).iter_errors(f):
            failures.append(f"frame {kind}: {e.message} at {list(e.absolute_path)}")
        counts["ws:" + kind] = counts.get("ws:" + kind, 0) + 1
    hooks = d["openapi"]["webhooks"]
    for b in d["bodies"]:
        kind = b.get("type")
        if kind not in hooks:
            failures.append(f"webhook body of unknown type {kind!r}: {b}")
            continue
        schema = hooks[kind]["post"]["requestBody"]["content"]["application/json"]["schema"]
        for e in validator(schema, d["openapi"]).iter_errors(b):
            failures.append(f"webhook {kind}: {e.message} at {list(e.absolute_path)}")
        counts["webhook:" + kind] = counts.get("webhook:" + kind, 0) + 1
    for f in failures:
        print(f)
    print(json.dumps(counts, sort_keys=True))
    sys.exit(1 if failures else 0)


main()

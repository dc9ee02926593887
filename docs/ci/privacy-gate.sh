#!/usr/bin/env bash
# The privacy gate of docs/ci/privacy-gate.yml, runnable by hand: a ragprivacy service over
# a synthetic tenant, attacked over HTTP as any client would, then gated against a baseline.
#   TENANT_MODE  the tenant under test (noisy_topk by default)
#   TARGETS      membership targets per world (100)
#   BASELINE     a baseline run's results.json (none: thresholds only)
#   MAX_AUC      the AUC no attack may be resolved above (0.6)
#   OUT          where the run, the gate's JSON and its JUnit report go (privacy-gate)
set -euo pipefail
MODE=${TENANT_MODE:-noisy_topk}
TARGETS=${TARGETS:-100}
OUT=${OUT:-privacy-gate}
PORT=${PORT:-8000}
mkdir -p "$OUT"
ragprivacy corpus synth --kind medical --n $((4 * TARGETS)) --seed 7 --out "$OUT/candidates.jsonl"
python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
members = rows[: len(rows) // 2]  # the service holds the first half
(out / "members.jsonl").write_text("".join(json.dumps(r) + "\n" for r in members))
(out / "members.txt").write_text("".join(r["id"] + "\n" for r in members))
PY
STATE="$OUT/state"
ragprivacy admin --state "$STATE" tenant create clinic --mode "$MODE" --k 3
ragprivacy admin --state "$STATE" docs add clinic "$OUT/members.jsonl"
ragprivacy admin --state "$STATE" account create clinic auditor --eps 4 --delta 1e-6 --rate-limit 100000
KEY=$(ragprivacy admin --state "$STATE" key create auditor | tail -n 1)
ragprivacy admin --state "$STATE" window open
ragprivacy serve --state "$STATE" --port "$PORT" --no-access-log > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.5; done
OPENAI_API_KEY="$KEY" ragprivacy attack --target "openai:ragprivacy@http://127.0.0.1:$PORT/v1" \
  --corpus "$OUT/candidates.jsonl" --members "$OUT/members.txt" --attack s2mia-s \
  --targets "$TARGETS" --calibration 10 --workers 1 --no-progress --out "$OUT/run"
AGAINST=()
if [ -n "${BASELINE:-}" ]; then
  if [ -f "$BASELINE" ]; then AGAINST=(--baseline "$BASELINE"); else
    echo "no baseline at $BASELINE yet: thresholds only (commit $OUT/run/results.json there)"; fi
fi
ragprivacy gate "$OUT/run" --max-auc "${MAX_AUC:-0.6}" "${AGAINST[@]}" \
  --json "$OUT/gate.json" --junit "$OUT/gate.xml"

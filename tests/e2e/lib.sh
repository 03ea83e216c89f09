# Sourced by the shell end-to-end tests: reading a run directory.

# The value of FIELD in RUN/summary.json.
summary() {
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$1/summary.json" "$2"
}

# The last step RUN/metrics.jsonl has recorded (0 before the first).
last_step() {
  /usr/bin/python3 -c 'import json, sys
s = 0
for line in open(sys.argv[1]):
    try: s = max(s, json.loads(line).get("step", 0))
    except ValueError: pass
print(s)' "$1/metrics.jsonl" 2>/dev/null || echo 0
}

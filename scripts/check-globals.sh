#!/usr/bin/env bash
# Fail on any writable data symbol (nm types B, D, C, S/G small data) defined in project objects,
# except the short allowlist below. Const tables (R) are fine.
set -u
objdir=${1:-build/obj}
allow='^$'
bad=0
while read -r obj; do
    case "$obj" in */tests/*) continue ;; esac
    out=$(nm "$obj" 2>/dev/null | awk '$2 ~ /^[BDCdbSG]$/ {print $3}' | grep -vE '^(\.|__)' | grep -vE "$allow")
    if [ -n "$out" ]; then
        echo "globals: $obj defines writable data: $(echo $out)"
        bad=1
    fi
done < <(find "$objdir" -name '*.o')
[ $bad -eq 0 ] && echo "globals: ok (no writable globals)"
exit $bad

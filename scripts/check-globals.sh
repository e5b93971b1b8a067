#!/usr/bin/env bash
# Fail on any writable data object (in .data, .bss, or common; not .data.rel.ro, which is read-only
# after relocation) defined in project C objects, except the short allowlist below. Const tables are
# fine. Reads the section of each symbol with objdump -t. CUDA objects are skipped (see below).
set -u
objdir=${1:-build/obj}
allow='^$'
bad=0
while read -r obj; do
    case "$obj" in */tests/*) continue ;; esac
    # Objects nvcc built from .cu files carry its generated registration and launch-stub data
    # (fat-binary handles, __device_stub__ statics); only C objects are checked.
    src=${obj#"$objdir"/}
    [ -f "${src%.o}.cu" ] && continue
    out=$(objdump -t "$obj" 2>/dev/null |
        awk '$0 ~ / O / { for (i = 1; i <= NF; i++) if ($i == "O") { sec = $(i + 1); name = $NF;
             if ((sec ~ /^\.(data|bss)(\.|$)/ && sec !~ /^\.data\.rel\.ro/) || sec == "*COM*") print name } }' |
        grep -vE "$allow")
    if [ -n "$out" ]; then
        echo "globals: $obj defines writable data: $(echo "$out" | tr "\n" " ")"
        bad=1
    fi
done < <(find "$objdir" -name '*.o')
[ $bad -eq 0 ] && echo "globals: ok (no writable globals)"
exit $bad

#!/usr/bin/env bash
# Fail on any writable data object (in .data, .bss, or common; not .data.rel.ro, which is read-only
# after relocation) defined in project objects, except the short allowlist below. Const tables are
# fine. Reads the section of each symbol with objdump -t.
set -u
objdir=${1:-build/obj}
# nvcc's generated registration data (fat-binary handles) is not ours to remove.
allow='(__cudaFatCubinHandle|__cudaPrelinkedFatbins|__nv_fatb|__nv_module_id|__cudaUnregisterBinaryUtil)'
bad=0
while read -r obj; do
    case "$obj" in */tests/*) continue ;; esac
    out=$(objdump -t "$obj" 2>/dev/null |
        awk '$0 ~ / O / { for (i = 1; i <= NF; i++) if ($i == "O") { sec = $(i + 1); name = $NF;
             if ((sec ~ /^\.(data|bss)(\.|$)/ && sec !~ /^\.data\.rel\.ro/) || sec == "*COM*") print name } }' |
        grep -vE "$allow")
    if [ -n "$out" ]; then
        echo "globals: $obj defines writable data: $(echo $out)"
        bad=1
    fi
done < <(find "$objdir" -name '*.o')
[ $bad -eq 0 ] && echo "globals: ok (no writable globals)"
exit $bad

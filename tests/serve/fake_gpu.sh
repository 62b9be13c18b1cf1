#!/bin/sh
# A stand-in for the GPU collector in the serve tests: two "GPUs" whose columns carry the GPU
# collector's names (gpu_util_N, gpu_band_N, gpu_mem_N in GiB, gpu_power_N in W), at the system
# level, through a PerDeviceMultiAggregateHandler (docs/plugin-protocol.md).
while IFS= read -r line; do
  case $line in
    *'"op":"setup"'*) printf '{"ok":true,"devices":{"system":2},"context":false}\n' ;;
    *'"op":"tick"'*)
      rest=${line#*'"tick":'}
      tick=${rest%%[!0-9]*}
      printf '{"ok":true,"tick":%s,"values":{"system":[[50,100],[25,0],[1.5,2],[120,300.5]]}}\n' "$tick"
      ;;
    *'"op":"shutdown"'*) exit 0 ;;
    *) printf '{"ok":false,"error":"unknown request"}\n' ;;
  esac
done

#!/bin/bash
# the kind labkit picks here: cpu-emu without a card, npu with one
kind=$(python3 -c 'from labkit.device import get_device; print(get_device().kind)')
if [ ! -f device.txt ]; then
  echo "device.txt is missing: write the kind line's value into it"
  exit 1
fi
got=$(tr -d '[:space:]' < device.txt)
if [ "$got" != "$kind" ]; then
  echo "device.txt says '$got', which is not the kind device_info.py reports here"
  exit 1
fi
echo "device.txt names this environment's device: $kind"

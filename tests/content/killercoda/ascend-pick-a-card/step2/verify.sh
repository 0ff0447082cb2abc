#!/bin/bash
[ -f cards.txt ] || { echo "cards.txt is missing: run the set-up block at the top of this step"; exit 1; }
[ -f visible.sh ] || { echo "visible.sh is missing: write it in this folder"; exit 1; }
want=$(tail -n 1 cards.txt)
# sourced in a shell of its own: whatever visible.sh does, it cannot end this script
got=$(env -i bash -c '. ./visible.sh >/dev/null 2>&1; printf %s "$ASCEND_RT_VISIBLE_DEVICES"')
if [ "$got" != "$want" ]; then
  echo "after sourcing visible.sh, ASCEND_RT_VISIBLE_DEVICES is '$got'; it should be the last card in cards.txt"
  exit 1
fi
echo "only card $want is visible"

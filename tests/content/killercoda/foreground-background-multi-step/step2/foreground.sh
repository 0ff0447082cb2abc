while [ ! -f background2 ]; do sleep 1; done
echo DONE

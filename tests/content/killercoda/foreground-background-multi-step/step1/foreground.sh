while [ ! -f background1 ]; do sleep 1; done
echo DONE

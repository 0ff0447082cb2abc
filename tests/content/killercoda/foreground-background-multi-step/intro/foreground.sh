while [ ! -f background0 ]; do sleep 1; done
echo Hello

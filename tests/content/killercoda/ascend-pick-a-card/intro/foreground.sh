echo "Welcome: python device_info.py shows the device this environment has"

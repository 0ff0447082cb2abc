"""Print the device labkit picked for this environment."""

from labkit.device import describe

for key, value in describe().items():
    print(f"{key}: {value}")

"""``python -m labserver.cli ...`` (used by provisioning/images/ci-setup.sh and the tests)."""

from labserver.cli.main import main

main()

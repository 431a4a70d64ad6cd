"""Code that runs inside the sandbox's fork-server processes.

Everything in this package uses only the standard library: the fork server may run on an interpreter
other than the venv's (one whose stdlib an unprivileged uid can read), where pydantic is not installed.
``boot.py`` loads these modules without importing ``rewardpipe/__init__`` or
``rewardpipe/execution/__init__``.
"""

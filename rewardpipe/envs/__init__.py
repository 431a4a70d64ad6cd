"""Built-in environments, each in a folder of its own, laid out as a user's environment package would be.
They are named like any environment (``--env ask_before_coding``): see :mod:`rewardpipe.references`."""

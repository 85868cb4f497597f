"""Suite-wide settings: the tests never read or write the user's program binary cache (a
cached binary would also hide the compiles some tests count); tests of the cache turn it
on in a process of their own with a temporary DLC_CACHE_DIR."""

import os

os.environ["DLC_PROGRAM_BINARY_CACHE"] = "0"

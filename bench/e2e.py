"""The end-to-end benchmark as a script: ``python bench/e2e.py --help`` (same as ``wiggle bench``).

The implementation ships in the package (wiggle/_bench) so ``wiggle bench`` works from any
installation, not only from a checkout.
"""

import sys

from wiggle._bench.e2e import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

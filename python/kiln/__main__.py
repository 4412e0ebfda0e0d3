"""python -m kiln ...: the kiln command line, the executable installed with the package."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kiln")
    if not os.access(exe, os.X_OK):
        sys.exit(f"kiln: the command-line tool is missing from the package ({exe})")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()

"""The `wtxt` command that `pip install` puts on PATH: the library's own
command line (`wtxt::cli`), run in this process. Nothing of it is Python."""
import sys

import wtxt._rust as _rust


def main() -> None:
    """Runs `wtxt` with this process's arguments and exits with its code."""
    sys.stdout.flush()
    sys.exit(_rust.main(sys.argv))


if __name__ == "__main__":
    main()

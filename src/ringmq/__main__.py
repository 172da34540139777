from __future__ import annotations

from ringmq.cli import main

main()

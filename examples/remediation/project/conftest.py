# Dependencies are installed offline into ./vendor (see tracebound's remediation demo).
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "vendor"))

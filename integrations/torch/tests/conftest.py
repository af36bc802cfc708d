"""pytest setup for the torch backend tests: makes ranks.py importable."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

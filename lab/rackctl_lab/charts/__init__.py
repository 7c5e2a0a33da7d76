"""Charts the lab installs where upstream's cannot be had offline (``rackctl up --charts`` takes this directory).

Each is the lab's own STAND-IN for an upstream chart of the same name and version (its ``Chart.yaml`` says
which), written for the values rackctl sets; the images it runs are the real programs.
"""

from pathlib import Path

#: The directory ``--charts`` is given (``<chart>/Chart.yaml`` per chart).
CHARTS_DIR = Path(__file__).resolve().parent

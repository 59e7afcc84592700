from tricklab.cli import run

run()

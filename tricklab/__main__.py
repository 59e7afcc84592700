from tricklab.cli.main import run

run()

"""An --out that cannot be a folder, as the commands that write one meet it (core/paths.py's
check_out_folder): each case, the words its one line says, and the folder they are tried in."""

from pathlib import Path

BAD_OUT_FOLDERS = [
    ("afile", "afile is a file, not a folder"),
    ("afile/sub", "afile is a file, not a folder"),
    ("/dev/null", "/dev/null is a device, not a folder"),
    ("dangling", "a link to a folder that does not exist"),
    ("dangling/x", "a link to a folder that does not exist"),
]


def make_bad_out_folders(folder: Path) -> Path:
    """`afile` and `dangling` (a link to `nowhere`) in `folder`; returns where `nowhere` would be:
    a check that made it would have followed the link."""
    (folder / "afile").write_text("x")
    (folder / "dangling").symlink_to(folder / "nowhere")
    return folder / "nowhere"

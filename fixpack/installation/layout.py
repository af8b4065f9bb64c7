"""Where fixpack keeps its state in an environment (the state directory): one place for the names,
shared by the full apply and the standard-library-only warm path."""

STATE_DIR_NAME = ".fixpack"  # beside the dist-info of the distributions it patches
MANIFEST = "manifest.json"
JOURNAL = "journal"  # the folder of a transaction under way
JOURNAL_INDEX = "journal.json"  # in it: which files, their hashes, their backups
PRISTINE_DIR = "pristine"  # a copy of each patched file as the release had it, by repository path


def aside_prefix(folder_name: str) -> str:
    """The name prefix of the folders an overlay ``folder_name`` is built in and swapped through,
    beside it: one left behind means an interrupted build."""
    return f".{folder_name}.fixpack-"

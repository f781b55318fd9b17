"""The duplicate window: the UNIQ_KEYs stored recently, with where each went (`window`), its numpy
hash tables (`key_table`), its snapshot file (`window_snapshot`), and the check of one commit round
against it (`round_check`). The writer uses it through one entry point, `checker.DuplicateChecker`,
called once per commit round. It reads first copies from the log and never imports the writer:
what it reads of a send is a protocol of its own."""

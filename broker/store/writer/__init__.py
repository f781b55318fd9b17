"""The one writer of the commit log (group commit): sends queue as append requests
(`append_requests`), the writer takes everything waiting as one commit round, checks it against
the duplicate window, places and writes it as one record and answers its sends (`appender`);
`commit_round` holds what one attempt at a commit round stores. It builds on the log and the
duplicate window and hands each written round to the store through one narrow interface
(`CommitTarget`), never importing the consume queues or `message_store`."""

"""The sans-IO wire: the protocol table both ends share, the decode budget, the value codec,
the frame connection and the core state machine. Bytes and the time go in; events, bytes to
send and deadlines come out. Nothing here starts a process, a thread or a wait (the launcher
imports the table by the bare package name ``wire``, so this file stays free of imports)."""

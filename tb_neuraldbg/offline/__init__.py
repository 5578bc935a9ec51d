"""Tools that read a logdir without a server: the reader, the offline re-diagnosis, text and HTML reports."""

"""Exercise answers, one module per chapter (``chNN.py`` with an ``ANSWERS`` dict of
functions computing each answer with the package). Read them only after trying."""

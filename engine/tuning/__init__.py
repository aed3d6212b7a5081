"""Tuning: search the speculation settings on this device (sweep), put two settings head to
head (race) and carry the answer out to other engines (export). Plain Python over the decoder:
no Qt, no command line."""

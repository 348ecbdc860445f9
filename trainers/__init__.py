"""Offline trainers (PURPLE, MemRerank, PG-Ret), imported as ``personamem.trainers``."""

"""Backends run what the service decided: ``base`` is the interface, ``local`` runs here."""

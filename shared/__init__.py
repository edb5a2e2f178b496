"""Code both Crank processes use: settings, database, domain types, crypto, logging."""

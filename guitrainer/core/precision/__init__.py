"""Mixed precision: the choices, the rules that check them against the device, the precision lab's data, the numerics monitor's data."""

"""What every stage shares: axis labels, byte sizes, shapes, device groups, source frames."""

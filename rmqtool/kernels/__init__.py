"""The one numpy copy of each bulk primitive: strided gathers and span widths, Java String.hashCode."""

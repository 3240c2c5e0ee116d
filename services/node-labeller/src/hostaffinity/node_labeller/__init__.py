"""node-labeller: keeps node labels equal to where each node's VM runs in vCenter."""

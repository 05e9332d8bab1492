"""The cluster simulator: scenarios (isr/sim/scenarios), the discrete-event
simulator of leader-side observations, and where its events go."""

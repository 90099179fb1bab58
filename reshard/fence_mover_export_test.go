package reshard

// FenceForMover exports fenceForMover: the tests stand for a mover that
// died between the flip and lifting its target's fence.
var FenceForMover = fenceForMover

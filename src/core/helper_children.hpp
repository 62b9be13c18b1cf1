#pragma once
// The helper processes sonde itself starts (plugin children, isolated plugin hosts). Under `sonde
// run` sonde is the child subreaper of its command, so a pid whose parent is sonde is an orphan
// of the monitored tree, unless it is one of these.
namespace sonde {

/// Records a helper child right after fork (any thread).
void note_helper_child(int pid);
/// Forgets it once reaped.
void forget_helper_child(int pid);
bool is_helper_child(int pid);

}  // namespace sonde

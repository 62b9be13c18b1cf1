#include "core/threads.hpp"

#include <pthread.h>

namespace sonde {

sigset_t async_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH})
    sigaddset(&set, s);
  return set;
}

AsyncSignalsBlocked::AsyncSignalsBlocked() {
  const sigset_t set = async_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, &old_);
}

AsyncSignalsBlocked::~AsyncSignalsBlocked() {
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace sonde

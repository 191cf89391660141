// Collectives across processes over Open MPI (built when CMake finds MPI). Every
// exchange is point-to-point with a deadline instead of a blocking MPI collective, so
// a rank that died or hangs turns into an error naming it, not a hung job.
#ifdef PODLET_HAVE_MPI
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "podlet/exec/pmap.h"
#include "podlet/exec/distributed.h"

namespace podlet {
namespace {

double timeout_seconds() {
  const char* e = std::getenv("PODLET_COLLECTIVE_TIMEOUT");
  return e ? std::atof(e) : 600.0;
}

class MpiComm : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allgather(const void* send, size_t bytes, void* recv) override {
    if (bytes > size_t(INT_MAX))
      throw ValueError(fmt("cross-process collective of ", bytes, " bytes exceeds MPI's 2 GiB message limit"));
    int n = int(bytes);
    std::memcpy(static_cast<char*>(recv) + size_t(rank_) * bytes, send, bytes);
    std::vector<MPI_Request> reqs;
    std::vector<int> peer;  // rank each request talks to (receives first)
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      reqs.emplace_back();
      MPI_Irecv(static_cast<char*>(recv) + size_t(p) * bytes, n, MPI_BYTE, p, kTag, MPI_COMM_WORLD, &reqs.back());
      peer.push_back(p);
    }
    size_t nrecv = reqs.size();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      reqs.emplace_back();
      MPI_Isend(send, n, MPI_BYTE, p, kTag, MPI_COMM_WORLD, &reqs.back());
      peer.push_back(p);
    }
    wait_all(reqs, peer, nrecv, "a cross-process collective");
  }

  void barrier() override {
    char b = 0;
    std::vector<char> all(size_);
    allgather(&b, 1, all.data());
  }

 private:
  static constexpr int kTag = 7301;

  void wait_all(std::vector<MPI_Request>& reqs, const std::vector<int>& peer, size_t nrecv, const char* what) {
    auto t0 = std::chrono::steady_clock::now();
    double limit = timeout_seconds();
    std::vector<char> done(reqs.size(), 0);
    size_t left = reqs.size();
    int spins = 0;
    while (left) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (done[i]) continue;
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (flag) { done[i] = 1; --left; }
      }
      if (!left) break;
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el > limit) {
        std::string missing;
        for (size_t i = 0; i < nrecv; ++i)
          if (!done[i]) missing += (missing.empty() ? "" : ", ") + std::to_string(peer[i]);
        if (missing.empty())
          for (size_t i = nrecv; i < reqs.size(); ++i)
            if (!done[i]) missing += (missing.empty() ? "" : ", ") + std::to_string(peer[i]);
        mark_failed();
        throw Error(fmt("process ", rank_, ": ", what, " timed out after ", limit, " s waiting for process(es) ",
                        missing, " (dead or stuck?). Set PODLET_COLLECTIVE_TIMEOUT to change the limit."));
      }
      // Poll tightly at first (steps are lockstep, peers are usually close), then back off.
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  int rank_ = 0, size_ = 1;
};

bool g_failed = false;

}  // namespace

void mark_failed() { g_failed = true; }

void mpi_initialize() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  set_comm(std::make_shared<MpiComm>());
}

void mpi_finalize() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (!inited || fin) return;
  set_comm(nullptr);
  // After a failed collective the peers are not all there: a clean finalize could wait
  // for them forever, an abort ends the whole job now.
  if (g_failed) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

void mpi_abort(int code) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

bool have_mpi() { return true; }

}  // namespace podlet
#else
#include <cstdlib>
#include "podlet/error.h"
#include "podlet/exec/distributed.h"

namespace podlet {
void mark_failed() {}
void mpi_initialize() {
  throw ValueError("podlet was built without MPI: install libopenmpi-dev and openmpi-bin (the README's set-up "
                   "command does) and rebuild");
}
void mpi_finalize() {}
void mpi_abort(int code) { std::_Exit(code); }
bool have_mpi() { return false; }
}  // namespace podlet
#endif

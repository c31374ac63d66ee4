#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pagoda {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("'" + path + "' is not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return io_error("cannot map '" + path + "': " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

void MappedFile::release(size_t offset, size_t size) const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t begin = (offset + page - 1) / page * page;  // whole pages inside the range
  const size_t end = std::min(offset + size, size_) / page * page;
  if (data_ == nullptr || begin >= end) return;
  madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace pagoda

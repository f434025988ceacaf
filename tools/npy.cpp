// tools/npy.cpp
#include "tools/npy.hpp"

#include <fstream>
#include <string>

#include "config/model_config.hpp"

namespace moe::tools {

void write_npy(const std::filesystem::path& path, const std::vector<float>& data,
               const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape)
    dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.resize(dims.size() - 1);  // "(3, 4)", but "(3,)"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + header.size() + 1;  // magic+version+len, header, '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw input_error("cannot write " + path.string());
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out)
    throw input_error("failed writing " + path.string());
}

}  // namespace moe::tools

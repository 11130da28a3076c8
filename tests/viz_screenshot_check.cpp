// Checks a headless screenshot of labkit-viz: the PNG exists, is not blank,
// and shows as many rank nodes as the scenario has ranks (counted as connected
// blobs of the rank-node color, which nothing else uses).
//
//   viz_screenshot_check FILE.png EXPECTED_RANKS
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include <stb_image.h>

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: viz_screenshot_check FILE.png RANKS\n"), 2;
  int w, h, channels;
  unsigned char* pixels = stbi_load(argv[1], &w, &h, &channels, 4);
  if (!pixels) return std::fprintf(stderr, "%s: not a readable PNG\n", argv[1]), 1;
  auto at = [&](int x, int y) { return pixels + (std::size_t(y) * w + x) * 4; };
  // Blank: every pixel the same.
  bool varied = false;
  for (int i = 0; i < w * h && !varied; ++i) varied = std::memcmp(pixels, pixels + std::size_t(i) * 4, 3) != 0;
  if (!varied) return std::fprintf(stderr, "%s: blank\n", argv[1]), 1;
  // Rank nodes: IM_COL32(255, 64, 160) in colors.h; flood-fill each blob.
  auto is_node = [&](int x, int y) {
    const unsigned char* p = at(x, y);
    return std::abs(p[0] - 255) < 8 && std::abs(p[1] - 64) < 8 && std::abs(p[2] - 160) < 8;
  };
  std::vector<char> seen(std::size_t(w) * h, 0);
  std::vector<int> sizes;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      if (seen[std::size_t(y) * w + x] || !is_node(x, y)) continue;
      int size = 0, min_x = x, max_x = x, min_y = y, max_y = y;  // for the report
      std::vector<std::pair<int, int>> stack = {{x, y}};
      seen[std::size_t(y) * w + x] = 1;
      while (!stack.empty()) {
        auto [cx, cy] = stack.back();
        stack.pop_back();
        ++size;
        min_x = std::min(min_x, cx), max_x = std::max(max_x, cx), min_y = std::min(min_y, cy), max_y = std::max(max_y, cy);
        for (auto [dx, dy] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
          const int nx = cx + dx, ny = cy + dy;
          if (nx < 0 || ny < 0 || nx >= w || ny >= h || seen[std::size_t(ny) * w + nx] || !is_node(nx, ny)) continue;
          seen[std::size_t(ny) * w + nx] = 1;
          stack.push_back({nx, ny});
        }
      }
      sizes.push_back(size);
      std::printf("  blob at (%d..%d, %d..%d), %d pixels\n", min_x, max_x, min_y, max_y, size);
    }
  stbi_image_free(pixels);
  // A node is a blob at least a quarter the size of the largest: not the inside
  // of a "0" or "8" drawn on a node, not a stray antialiased pixel.
  const int largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  const int blobs = int(std::count_if(sizes.begin(), sizes.end(), [&](int s) { return 4 * s >= largest; }));
  const int expected = std::atoi(argv[2]);
  std::printf("%s: %dx%d, %d rank nodes (expected %d)\n", argv[1], w, h, blobs, expected);
  return blobs == expected ? 0 : 1;
}

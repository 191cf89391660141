// libjpeg glue: see jpeg.h. The C++ exception is thrown only after jpeg_destroy_*.
#include "podlet/io/jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>

#include "podlet/error.h"

namespace podlet::io {
namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// level -1 is a warning about corrupt data; >= 0 are trace messages, ignored.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_error(cinfo);
}

void install(ErrorMgr& e) {
  jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error;
  e.pub.emit_message = on_message;
  e.message[0] = '\0';
}

const char* color_name(J_COLOR_SPACE c) {
  switch (c) {
    case JCS_GRAYSCALE: return "grayscale";
    case JCS_RGB: return "RGB";
    case JCS_YCbCr: return "YCbCr";
    case JCS_CMYK: return "CMYK";
    case JCS_YCCK: return "YCCK";
    default: return "unknown";
  }
}

}  // namespace

bool is_jpeg(const uint8_t* data, size_t n) {
  return n >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

namespace {

// The libjpeg calls, each under a setjmp. Everything they touch lives in the caller's
// frame (passed by pointer), so nothing here is an automatic variable modified between
// setjmp and longjmp, and the only objects in scope are C structs.
enum class Outcome { kOk, kLibjpegError, kUnsupported, kTooLarge };

Outcome run_decode(jpeg_decompress_struct* cinfo, ErrorMgr* err, const uint8_t* data, size_t n,
                   int channels, uint64_t max_pixels, DecodedImage* img) {
  if (setjmp(err->jump)) return Outcome::kLibjpegError;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(cinfo, TRUE);
  // libjpeg converts CMYK/YCCK only to CMYK; refusing is clearer than wrong colours.
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) return Outcome::kUnsupported;
  int want = channels ? channels : cinfo->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;
  cinfo->out_color_space = want == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;  // libjpeg's and tf.io.decode_jpeg's default, stated: it fixes the pixels
  uint64_t pixels = uint64_t(cinfo->image_width) * cinfo->image_height;
  if (pixels == 0 || pixels > max_pixels) return Outcome::kTooLarge;
  jpeg_start_decompress(cinfo);
  img->height = int(cinfo->output_height);
  img->width = int(cinfo->output_width);
  img->channels = int(cinfo->output_components);
  img->pixels.resize(size_t(img->height) * img->width * img->channels);
  size_t stride = size_t(img->width) * img->channels;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = img->pixels.data() + cinfo->output_scanline * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return Outcome::kOk;
}

// A growing malloc'd output buffer that podlet, not libjpeg, owns: jpeg_mem_dest frees
// and replaces its buffer as it grows, which leaves the caller a dangling pointer when
// an error longjmps out mid-way.
struct Dest {
  jpeg_destination_mgr pub;
  unsigned char* buf = nullptr;
  size_t cap = 0, len = 0;
};

void dest_init(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<Dest*>(cinfo->dest);
  d->cap = 1 << 16;
  d->buf = static_cast<unsigned char*>(std::malloc(d->cap));
  if (!d->buf) { cinfo->err->msg_code = JERR_OUT_OF_MEMORY; cinfo->err->error_exit(reinterpret_cast<j_common_ptr>(cinfo)); }
  d->pub.next_output_byte = d->buf;
  d->pub.free_in_buffer = d->cap;
}

boolean dest_grow(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<Dest*>(cinfo->dest);
  auto* bigger = static_cast<unsigned char*>(std::realloc(d->buf, d->cap * 2));
  if (!bigger) { cinfo->err->msg_code = JERR_OUT_OF_MEMORY; cinfo->err->error_exit(reinterpret_cast<j_common_ptr>(cinfo)); }
  d->buf = bigger;
  d->pub.next_output_byte = d->buf + d->cap;  // the whole old buffer is full
  d->pub.free_in_buffer = d->cap;
  d->cap *= 2;
  return TRUE;
}

void dest_term(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<Dest*>(cinfo->dest);
  d->len = d->cap - d->pub.free_in_buffer;
}

bool run_encode(jpeg_compress_struct* cinfo, ErrorMgr* err, const uint8_t* pixels, int height, int width,
                int channels, int quality, Dest* dest) {
  if (setjmp(err->jump)) return false;
  dest->pub.init_destination = dest_init;
  dest->pub.empty_output_buffer = dest_grow;
  dest->pub.term_destination = dest_term;
  cinfo->dest = &dest->pub;
  cinfo->image_width = JDIMENSION(width);
  cinfo->image_height = JDIMENSION(height);
  cinfo->input_components = channels;
  cinfo->in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  jpeg_start_compress(cinfo, TRUE);
  size_t stride = size_t(width) * channels;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

DecodedImage decode_jpeg(const uint8_t* data, size_t n, const std::string& where, int channels,
                         uint64_t max_pixels) {
  if (channels != 0 && channels != 1 && channels != 3)
    throw ValueError(fmt(where, ": cannot decode JPEG to ", channels, " channels; expected 0 (as stored), 1 or 3"));
  if (!is_jpeg(data, n)) {
    const char* hint = n >= 8 && std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0
                           ? " (it is a PNG; podlet decodes JPEG-encoded images only)" : "";
    throw ValueError(fmt(where, ": not a JPEG image: ", n, " bytes not starting with the FF D8 FF marker", hint));
  }
  DecodedImage img;
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  cinfo.err = &err.pub;
  install(err);
  jpeg_create_decompress(&cinfo);
  Outcome r = run_decode(&cinfo, &err, data, n, channels, max_pixels, &img);
  J_COLOR_SPACE stored = cinfo.jpeg_color_space;
  uint64_t w = cinfo.image_width, h = cinfo.image_height;
  jpeg_destroy_decompress(&cinfo);
  switch (r) {
    case Outcome::kOk: return img;
    case Outcome::kLibjpegError:
      throw ValueError(fmt(where, ": undecodable JPEG (", n, " bytes): ", err.message));
    case Outcome::kUnsupported:
      throw ValueError(fmt(where, ": ", color_name(stored),
                           " JPEGs are not supported; expected grayscale or colour (YCbCr/RGB)"));
    case Outcome::kTooLarge:
      throw ValueError(fmt(where, ": JPEG of ", w, "x", h, " pixels is ", w * h == 0 ? "empty" : "too large",
                           " (limit ", max_pixels, " pixels)"));
  }
  return img;
}

std::string encode_jpeg(const uint8_t* pixels, int height, int width, int channels, int quality,
                        const std::string& where) {
  if (channels != 1 && channels != 3)
    throw ValueError(fmt(where, ": cannot JPEG-encode an image with ", channels, " channels; expected 1 or 3"));
  if (height <= 0 || width <= 0 || height > JPEG_MAX_DIMENSION || width > JPEG_MAX_DIMENSION)
    throw ValueError(fmt(where, ": cannot JPEG-encode a ", height, "x", width, " image (each side must be 1..",
                         JPEG_MAX_DIMENSION, ")"));
  if (quality < 1 || quality > 100)
    throw ValueError(fmt(where, ": JPEG quality ", quality, " out of range; expected 1..100"));
  jpeg_compress_struct cinfo;
  ErrorMgr err;
  Dest dest;
  cinfo.err = &err.pub;
  install(err);
  jpeg_create_compress(&cinfo);
  bool ok = run_encode(&cinfo, &err, pixels, height, width, channels, quality, &dest);
  jpeg_destroy_compress(&cinfo);
  std::string out = ok ? std::string(reinterpret_cast<const char*>(dest.buf), dest.len) : std::string();
  std::free(dest.buf);
  if (!ok) throw ValueError(fmt(where, ": JPEG encoding failed: ", err.message));
  return out;
}

}  // namespace podlet::io

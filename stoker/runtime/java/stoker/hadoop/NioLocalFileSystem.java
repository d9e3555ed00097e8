package stoker.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/** Hadoop's checksummed local file system over {@link NioRawLocalFileSystem}: `fs.file.impl`. */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
